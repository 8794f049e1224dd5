//! SubjectReview (test/e2e/auth/subjectreviews.go): what a SubjectAccessReview and a
//! LocalSubjectAccessReview answer for a ServiceAccount MUST match what the API server does when
//! that ServiceAccount, impersonated, makes the request.

use k8s_openapi::api::authorization::v1::{LocalSubjectAccessReview, SubjectAccessReview};
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use crate::ctx::{from_json, Ctx};
use crate::error::{CaseError, CaseResult};
use crate::must;

fn config_error(e: impl std::fmt::Display) -> CaseError {
    CaseError::Failed(format!("building the impersonating client: {e}"))
}

/// The run's client configuration, impersonating `user` (with its uid and groups).
async fn impersonating(
    ctx: &Ctx,
    user: &str,
    uid: &str,
    groups: &[String],
) -> CaseResult<kube::Client> {
    let mut config = match &ctx.cluster.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(config_error)?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .map_err(config_error)?
        }
        None => kube::Config::infer().await.map_err(config_error)?,
    };
    config.auth_info.impersonate = Some(user.to_string());
    config.auth_info.impersonate_uid = Some(uid.to_string());
    config.auth_info.impersonate_groups = Some(groups.to_vec());
    kube::Client::try_from(config).map_err(config_error)
}

/// SubjectReview, API Operations: the ServiceAccount MUST be created; a SubjectAccessReview for it
/// (list configmaps in the namespace) MUST be created and its `allowed` MUST match whether the
/// impersonated ServiceAccount's list is allowed; the same MUST hold for a
/// LocalSubjectAccessReview.
pub async fn subject_review(ctx: &Ctx) -> CaseResult {
    let sa: ServiceAccount = from_json(json!({"metadata": {"name": "e2e"}}))?;
    let sa = ctx
        .api::<ServiceAccount>()
        .create(&PostParams::default(), &sa)
        .await?;
    let ns = ctx.ns.as_str();
    let user = format!("system:serviceaccount:{ns}:e2e");
    let groups = vec![
        "system:authenticated".to_string(),
        "system:serviceaccounts".to_string(),
        format!("system:serviceaccounts:{ns}"),
    ];
    let uid = sa.metadata.uid.clone().unwrap_or_default();
    let attributes =
        json!({"verb": "list", "resource": "configmaps", "namespace": ns, "version": "v1"});

    let sar: SubjectAccessReview = from_json(json!({"spec": {
        "resourceAttributes": attributes, "user": user, "groups": groups, "uid": uid,
    }}))?;
    let sar = ctx
        .all::<SubjectAccessReview>()
        .create(&PostParams::default(), &sar)
        .await?;
    let expected = sar.status.map(|s| s.allowed).unwrap_or(false);

    let client = impersonating(ctx, &user, &uid, &groups).await?;
    let actually = match Api::<ConfigMap>::namespaced(client, ns)
        .list(&ListParams::default())
        .await
    {
        Ok(_) => true,
        Err(kube::Error::Api(e)) if e.code == 403 => false,
        Err(e) => {
            return Err(CaseError::Failed(format!(
                "listing configmaps as {user}: unexpected error {e}"
            )))
        }
    };
    must!(
        actually == expected,
        "SubjectAccessReview for {user:?} in {ns:?}: allowed {expected}, the request allowed {actually}"
    );

    // Upstream names the ServiceAccount by its short name here, as written.
    let lsar: LocalSubjectAccessReview = from_json(json!({
        "metadata": {"namespace": ns},
        "spec": {"resourceAttributes": attributes, "user": "e2e", "groups": groups, "uid": uid},
    }))?;
    let lsar = ctx
        .api::<LocalSubjectAccessReview>()
        .create(&PostParams::default(), &lsar)
        .await?;
    let expected = lsar.status.map(|s| s.allowed).unwrap_or(false);
    must!(
        actually == expected,
        "LocalSubjectAccessReview for {user:?} in {ns:?}: allowed {expected}, the request allowed {actually}"
    );
    Ok(())
}
