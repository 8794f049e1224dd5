//! sig-auth entries: ServiceAccounts and the root CA ConfigMap. Each case restates the entry's MUSTs in
//! its doc comment.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::{case, Case};
use crate::ctx::{by_label, from_json, Ctx};
use crate::error::CaseResult;
use crate::{must, must_eq};

pub const CASES: &[Case] = &[
    case!(
        "[sig-auth] ServiceAccounts should guarantee kube-root-ca.crt exist in any namespace [Conformance]",
        "svcaccounts",
        root_ca_configmap
    ),
    case!(
        "[sig-auth] ServiceAccounts should run through the lifecycle of a ServiceAccount [Conformance]",
        "svcaccounts",
        serviceaccount_lifecycle
    ),
    case!(
        "[sig-auth] ServiceAccounts should update a ServiceAccount [Conformance]",
        "svcaccounts",
        serviceaccount_update
    ),
];

const ROOT_CA: &str = "kube-root-ca.crt";

/// Wait for kube-root-ca.crt in the namespace and return its ca.crt.
async fn root_ca(ctx: &Ctx, what: &str) -> CaseResult<String> {
    let cms: Api<ConfigMap> = ctx.api();
    ctx.wait(what, Duration::from_secs(60), || async {
        let cm = cms.get_opt(ROOT_CA).await?;
        let ca = cm
            .and_then(|c| c.data)
            .and_then(|d| d.get("ca.crt").cloned())
            .filter(|ca| ca.contains("BEGIN CERTIFICATE"));
        Ok(ca.ok_or("no kube-root-ca.crt with a ca.crt yet"))
    })
    .await
}

/// ServiceAccount, kube-root-ca.crt: every namespace MUST get the ConfigMap kube-root-ca.crt holding
/// the cluster CA; deleted, it MUST be recreated; its data changed, it MUST be reconciled back.
async fn root_ca_configmap(ctx: &Ctx) -> CaseResult {
    let cms: Api<ConfigMap> = ctx.api();
    let ca = root_ca(ctx, "kube-root-ca.crt in a new namespace").await?;
    cms.delete(ROOT_CA, &DeleteParams::default()).await?;
    let again = root_ca(ctx, "kube-root-ca.crt recreated after delete").await?;
    must_eq!(again, ca, "the recreated ca.crt");
    cms.patch(
        ROOT_CA,
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"ca.crt": "changed"}})),
    )
    .await?;
    let back = ctx
        .wait(
            "kube-root-ca.crt reconciled after an update",
            Duration::from_secs(60),
            || async {
                let cm = cms.get(ROOT_CA).await?;
                let now = cm.data.and_then(|d| d.get("ca.crt").cloned());
                Ok(match now {
                    Some(v) if v == ca => Ok(v),
                    other => Err(format!("ca.crt is {other:?}")),
                })
            },
        )
        .await?;
    must_eq!(back, ca, "the reconciled ca.crt");
    Ok(())
}

/// ServiceAccount lifecycle: a created ServiceAccount (labelled) MUST be readable; a patch setting
/// automountServiceAccountToken false MUST be read back; a list by label MUST find it; after a
/// deletecollection by label it MUST be gone.
async fn serviceaccount_lifecycle(ctx: &Ctx) -> CaseResult {
    let sas: Api<ServiceAccount> = ctx.api();
    let sa: ServiceAccount = from_json(json!({
        "metadata": {"name": "testserviceaccount", "labels": {"test-serviceaccount-static": "true"}},
        "automountServiceAccountToken": true,
    }))?;
    sas.create(&PostParams::default(), &sa).await?;
    sas.get("testserviceaccount").await?;
    sas.patch(
        "testserviceaccount",
        &PatchParams::default(),
        &Patch::Merge(json!({"automountServiceAccountToken": false})),
    )
    .await?;
    let got = sas.get("testserviceaccount").await?;
    must_eq!(
        got.automount_service_account_token,
        Some(false),
        "automountServiceAccountToken after the patch"
    );
    let listed = sas
        .list(&by_label("test-serviceaccount-static", "true"))
        .await?;
    must!(
        listed
            .items
            .iter()
            .any(|s| s.metadata.name.as_deref() == Some("testserviceaccount")),
        "the ServiceAccount is not listed by its label"
    );
    sas.delete_collection(
        &DeleteParams::default(),
        &by_label("test-serviceaccount-static", "true"),
    )
    .await?;
    let after = sas
        .list(&by_label("test-serviceaccount-static", "true"))
        .await?;
    must!(
        after.items.is_empty(),
        "the ServiceAccount remains after deletecollection"
    );
    Ok(())
}

/// ServiceAccount, update: an update setting automountServiceAccountToken true MUST be read back.
async fn serviceaccount_update(ctx: &Ctx) -> CaseResult {
    let sas: Api<ServiceAccount> = ctx.api();
    let sa: ServiceAccount = from_json(json!({"metadata": {"name": "e2e-sa"}}))?;
    sas.create(&PostParams::default(), &sa).await?;
    let mut got = sas.get("e2e-sa").await?;
    got.automount_service_account_token = Some(true);
    sas.replace("e2e-sa", &PostParams::default(), &got).await?;
    let after = sas.get("e2e-sa").await?;
    must_eq!(
        after.automount_service_account_token,
        Some(true),
        "automountServiceAccountToken after the update"
    );
    Ok(())
}
