//! sig-node PodTemplates entries, written from upstream's test/e2e/common/node/podtemplates.go:
//! the lifecycle (create, get, patch, list by label across namespaces, delete), a delete
//! collection by label, and a replace.

use std::time::Duration;

use k8s_openapi::api::core::v1::PodTemplate;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::{case, Case};
use crate::ctx::{from_json, Ctx};
use crate::error::CaseResult;
use crate::must_eq;

pub const CASES: &[Case] = &[
    case!(
        "[sig-node] PodTemplates should run the lifecycle of PodTemplates [Conformance]",
        "podtemplate",
        lifecycle
    ),
    case!(
        "[sig-node] PodTemplates should delete a collection of pod templates [Conformance]",
        "podtemplate",
        delete_collection
    ),
    case!(
        "[sig-node] PodTemplates should replace a pod template [Conformance]",
        "podtemplate",
        replace
    ),
];

fn template(name: &str, labels: serde_json::Value, container: &str, image: &str) -> PodTemplate {
    from_json(json!({
        "metadata": {"name": name, "labels": labels},
        "template": {"spec": {"containers": [{"name": container, "image": image}]}}
    }))
    .unwrap_or_default()
}

fn suffix() -> String {
    use rand::Rng;
    rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        .take(5)
        .map(char::from)
        .collect()
}

fn label(t: &PodTemplate, key: &str) -> Option<String> {
    t.metadata.labels.as_ref()?.get(key).cloned()
}

/// PodTemplate lifecycle: created, read, patched (the label MUST show), found by its static
/// label across namespaces, deleted (and then MUST NOT be listed).
async fn lifecycle(ctx: &Ctx) -> CaseResult {
    let name = format!("nginx-pod-template-{}", suffix());
    let all: Api<PodTemplate> = Api::all(ctx.client.clone());
    let by_static = ListParams::default().labels("podtemplate-static=true");
    let before = all.list(&by_static).await?.items;
    must_eq!(
        before
            .iter()
            .filter(|t| t.metadata.namespace.as_deref() == Some(ctx.ns.as_str()))
            .count(),
        0,
        "templates in the namespace before the create"
    );
    let api: Api<PodTemplate> = ctx.api();
    let t = template(
        &name,
        json!({"podtemplate-static": "true"}),
        "nginx",
        &ctx.images().agnhost(),
    );
    api.create(&PostParams::default(), &t).await?;
    let read = api.get(&name).await?;
    must_eq!(
        read.metadata.name.as_deref(),
        Some(name.as_str()),
        "the read name"
    );
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Strategic(json!({"metadata": {"labels": {"podtemplate": "patched"}}})),
    )
    .await?;
    let read = api.get(&name).await?;
    must_eq!(
        label(&read, "podtemplate").as_deref(),
        Some("patched"),
        "the patched label"
    );
    let listed = all.list(&by_static).await?.items;
    must_eq!(
        listed
            .iter()
            .filter(|t| t.metadata.name.as_deref() == Some(name.as_str())
                && label(t, "podtemplate").as_deref() == Some("patched"))
            .count(),
        1,
        "the template listed by its static label with the patched one"
    );
    api.delete(&name, &DeleteParams::default()).await?;
    let after = all.list(&by_static).await?.items;
    must_eq!(
        after
            .iter()
            .filter(|t| t.metadata.namespace.as_deref() == Some(ctx.ns.as_str()))
            .count(),
        0,
        "templates in the namespace after the delete"
    );
    Ok(())
}

/// PodTemplate, delete a collection: three labelled templates are listed, deleted by label, and
/// then MUST NOT be listed.
async fn delete_collection(ctx: &Ctx) -> CaseResult {
    let api: Api<PodTemplate> = ctx.api();
    let names = [
        "test-podtemplate-1",
        "test-podtemplate-2",
        "test-podtemplate-3",
    ];
    for n in names {
        let t = template(
            n,
            json!({"podtemplate-set": "true"}),
            "token-test",
            &ctx.images().agnhost(),
        );
        api.create(&PostParams::default(), &t).await?;
    }
    let lp = ListParams::default().labels("podtemplate-set=true");
    must_eq!(
        api.list(&lp).await?.items.len(),
        names.len(),
        "templates listed by label"
    );
    api.delete_collection(&DeleteParams::default(), &lp).await?;
    ctx.wait(
        "the collection to be gone",
        Duration::from_secs(60),
        || async {
            let n = api.list(&lp).await?.items.len();
            Ok(if n == 0 {
                Ok(())
            } else {
                Err(format!("{n} left"))
            })
        },
    )
    .await
}

/// PodTemplate, replace: an update of the template's annotations MUST show in the response.
async fn replace(ctx: &Ctx) -> CaseResult {
    let api: Api<PodTemplate> = ctx.api();
    let name = format!("podtemplate-{}", suffix());
    let t = template(&name, json!({}), "e2e-test", &ctx.images().agnhost());
    api.create(&PostParams::default(), &t).await?;
    let updated = ctx
        .wait("the replace", Duration::from_secs(60), || async {
            let mut t = api.get(&name).await?;
            t.template
                .get_or_insert_with(Default::default)
                .metadata
                .get_or_insert_with(Default::default)
                .annotations = Some([("updated".to_string(), "true".to_string())].into());
            Ok(match api.replace(&name, &PostParams::default(), &t).await {
                Ok(t) => Ok(t),
                Err(kube::Error::Api(s)) if s.code == 409 => Err("conflict".to_string()),
                Err(e) => return Err(e.into()),
            })
        })
        .await?;
    let annotations = updated
        .template
        .and_then(|t| t.metadata)
        .and_then(|m| m.annotations)
        .unwrap_or_default();
    must_eq!(
        annotations.get("updated").map(String::as_str),
        Some("true"),
        "the replaced template's annotation"
    );
    Ok(())
}
