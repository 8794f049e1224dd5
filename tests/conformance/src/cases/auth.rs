//! sig-auth entries (test/e2e/auth): ServiceAccounts (their tokens mounted into pods, projected,
//! discovered through the issuer's OIDC endpoints), the root CA ConfigMap, the
//! CertificateSigningRequest API and SubjectAccessReviews. Each case restates the entry's MUSTs in
//! its doc comment.

use std::time::Duration;

use k8s_openapi::api::authentication::v1::TokenReview;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::{case, Case};
use crate::ctx::{by_label, from_json, Ctx};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

mod csr;
mod subject_review;

pub const CASES: &[Case] = &[
    case!(
        "[sig-auth] ServiceAccounts should mount an API token into pods [Conformance]",
        "svcaccounts",
        mount_api_token
    ),
    case!(
        "[sig-auth] ServiceAccounts should allow opting out of API token automount [Conformance]",
        "svcaccounts",
        automount_opt_out
    ),
    case!(
        "[sig-auth] ServiceAccounts should mount projected service account token [Conformance]",
        "svcaccounts",
        projected_token
    ),
    case!(
        "[sig-auth] ServiceAccounts ServiceAccountIssuerDiscovery should support OIDC discovery of service account issuer [Conformance]",
        "svcaccounts",
        oidc_discovery
    ),
    case!(
        "[sig-auth] Certificates API [Privileged:ClusterAdmin] should support CSR API operations [Conformance]",
        "certificates",
        csr::csr_api
    ),
    case!(
        "[sig-auth] SubjectReview should support SubjectReview API operations [Conformance]",
        "subjectreview",
        subject_review::subject_review
    ),
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

/// serviceaccount.DefaultAPITokenMountPath.
const TOKEN_MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// A suffix unique to the case (upstream's uuid in pod names).
fn unique(ctx: &Ctx) -> &str {
    &ctx.ns[ctx.ns.len() - 5..]
}

/// Service Account Tokens Must AutoMount: a pod of a new ServiceAccount MUST have the token, the
/// root CA (the kube-root-ca.crt ConfigMap's) and its namespace mounted at the default path; the
/// token MUST authenticate, by TokenReview, as the ServiceAccount with its groups and the extra
/// info naming the token (JTI), the pod and its node.
async fn mount_api_token(ctx: &Ctx) -> CaseResult {
    let sa: ServiceAccount = from_json(json!({"metadata": {"name": "mount-test"}}))?;
    ctx.api::<ServiceAccount>()
        .create(&PostParams::default(), &sa)
        .await?;
    let name = format!("pod-service-account-{}", unique(ctx));
    let pod: Pod = from_json(json!({
        "metadata": {"name": name},
        "spec": {
            "serviceAccountName": "mount-test",
            "containers": [{"name": "test", "image": ctx.images().busybox(),
                "command": ["sleep", "100000"]}],
            "terminationGracePeriodSeconds": 0,
            "restartPolicy": "Never",
        }
    }))?;
    ctx.create_pod(&pod).await?;
    let pod = ctx.wait_running(&name).await?;
    let node_name = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    let node = ctx.all::<Node>().get(&node_name).await?;

    let read = |file: &'static str| {
        let name = name.clone();
        async move {
            ctx.exec(&name, "test", &["cat", &format!("{TOKEN_MOUNT}/{file}")])
                .await
        }
    };
    let token = read("token").await?;
    let ca = read("ca.crt").await?;
    let namespace = read("namespace").await?;
    let root_ca = ctx.api::<ConfigMap>().get(ROOT_CA).await?;
    let want_ca = root_ca
        .data
        .and_then(|d| d.get("ca.crt").cloned())
        .unwrap_or_default();
    must_eq!(ca, want_ca, "the mounted ca.crt");
    must_eq!(namespace, ctx.ns, "the mounted namespace");

    let review: TokenReview = from_json(json!({"spec": {"token": token}}))?;
    let review = ctx
        .all::<TokenReview>()
        .create(&PostParams::default(), &review)
        .await?;
    let status = review.status.unwrap_or_default();
    must!(
        status.authenticated == Some(true),
        "the mounted token is not authenticated: {:?}",
        status.error
    );
    must!(
        status.error.as_deref().unwrap_or("").is_empty(),
        "the TokenReview has an error: {:?}",
        status.error
    );
    let user = status.user.unwrap_or_default();
    must_eq!(
        user.username.as_deref().unwrap_or(""),
        format!("system:serviceaccount:{}:mount-test", ctx.ns),
        "the token's username"
    );
    let groups = user.groups.unwrap_or_default();
    for g in [
        "system:authenticated".to_string(),
        "system:serviceaccounts".to_string(),
        format!("system:serviceaccounts:{}", ctx.ns),
    ] {
        must!(groups.contains(&g), "expected {g} group, had {groups:?}");
    }
    let extra = user.extra.unwrap_or_default();
    let one = |key: &str| -> Option<String> {
        match extra.get(&format!("authentication.kubernetes.io/{key}")) {
            Some(v) if v.len() == 1 => Some(v[0].clone()),
            _ => None,
        }
    };
    must!(
        one("credential-id").is_some_and(|c| c.starts_with("JTI=")),
        "expected a single authentication.kubernetes.io/credential-id extra starting with 'JTI=', got {extra:?}"
    );
    must_eq!(one("pod-name"), Some(name.clone()), "the pod-name extra");
    must_eq!(
        one("pod-uid"),
        pod.metadata.uid.clone(),
        "the pod-uid extra"
    );
    must_eq!(one("node-name"), Some(node_name), "the node-name extra");
    must_eq!(one("node-uid"), node.metadata.uid, "the node-uid extra");
    Ok(())
}

/// Service account tokens auto mount optionally: the token volume MUST be mounted unless the pod
/// spec, or (when the pod does not say) its ServiceAccount, sets automountServiceAccountToken false.
async fn automount_opt_out(ctx: &Ctx) -> CaseResult {
    let sas: Api<ServiceAccount> = ctx.api();
    for (name, automount) in [("mount", true), ("nomount", false)] {
        let sa: ServiceAccount = from_json(json!({
            "metadata": {"name": name}, "automountServiceAccountToken": automount,
        }))?;
        sas.create(&PostParams::default(), &sa).await?;
    }
    // (pod name, service account, the pod spec's automountServiceAccountToken, token expected)
    let cases: [(&str, &str, Option<bool>, bool); 9] = [
        ("pod-service-account-defaultsa", "default", None, true),
        ("pod-service-account-mountsa", "mount", None, true),
        ("pod-service-account-nomountsa", "nomount", None, false),
        (
            "pod-service-account-defaultsa-mountspec",
            "default",
            Some(true),
            true,
        ),
        (
            "pod-service-account-mountsa-mountspec",
            "mount",
            Some(true),
            true,
        ),
        (
            "pod-service-account-nomountsa-mountspec",
            "nomount",
            Some(true),
            true,
        ),
        (
            "pod-service-account-defaultsa-nomountspec",
            "default",
            Some(false),
            false,
        ),
        (
            "pod-service-account-mountsa-nomountspec",
            "mount",
            Some(false),
            false,
        ),
        (
            "pod-service-account-nomountsa-nomountspec",
            "nomount",
            Some(false),
            false,
        ),
    ];
    for (pod_name, sa, automount, expected) in cases {
        let pod: Pod = from_json(json!({
            "metadata": {"name": pod_name},
            "spec": {
                "containers": [{"name": "token-test", "image": ctx.images().agnhost()}],
                "restartPolicy": "Never",
                "serviceAccountName": sa,
                "automountServiceAccountToken": automount,
            }
        }))?;
        let created = ctx.create_pod(&pod).await?;
        let mounted = created
            .spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .flat_map(|c| c.volume_mounts.iter().flatten())
            .any(|m| m.mount_path == TOKEN_MOUNT);
        must_eq!(mounted, expected, "{pod_name}: the token volume mounted");
    }
    Ok(())
}

/// TokenRequestProjection: a projected serviceAccountToken volume MUST hold a token (a JWT) the
/// container can read.
async fn projected_token(ctx: &Ctx) -> CaseResult {
    let name = format!("test-pod-{}", unique(ctx));
    let pod: Pod = from_json(json!({
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "volumes": [{"name": "test-volume", "projected": {"sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}]}}],
            "containers": [{
                "name": "agnhost-container",
                "image": ctx.images().agnhost(),
                "command": ["/agnhost"],
                "args": ["mounttest", "--file_content=/test-volume/token"],
                "volumeMounts": [{"name": "test-volume", "mountPath": "/test-volume", "readOnly": true}],
            }],
        }
    }))?;
    let log = ctx.expect_output(&pod, "agnhost-container", &[]).await?;
    let want = regex::Regex::new(
        r#"content of file "/test-volume/token": [A-Za-z0-9-_=]+\.[A-Za-z0-9-_=]+\.?[A-Za-z0-9-_.+/=]*"#,
    )
    .map_err(|e| CaseError::Failed(format!("the token regex: {e}")))?;
    must!(
        want.is_match(&log),
        "the projected token was not read back as a JWT; the log is:\n{log}"
    );
    Ok(())
}

/// OIDC Discovery: a pod MUST verify its own projected token (audience oidc-discovery-test) against
/// the issuer's discovery document and keys, served by the API server (agnhost
/// test-service-account-issuer-discovery, which exits 0 only then).
async fn oidc_discovery(ctx: &Ctx) -> CaseResult {
    // The discovery URLs are readable by the role, not by every service account: bound for the
    // case's default ServiceAccount, and unbound afterwards.
    let role = "system:service-account-issuer-discovery";
    let binding_name = format!("{}-{role}", ctx.ns);
    let binding: ClusterRoleBinding = from_json(json!({
        "metadata": {"name": binding_name},
        "subjects": [{"kind": "ServiceAccount", "apiGroup": "", "name": "default", "namespace": ctx.ns}],
        "roleRef": {"name": role, "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole"},
    }))?;
    let bindings = ctx.all::<ClusterRoleBinding>();
    bindings.create(&PostParams::default(), &binding).await?;
    let result = oidc_validator(ctx).await;
    let unbound = bindings
        .delete(&binding_name, &DeleteParams::default())
        .await;
    result?;
    unbound?;
    Ok(())
}

async fn oidc_validator(ctx: &Ctx) -> CaseResult {
    let name = "oidc-discovery-validator";
    let pod: Pod = from_json(json!({
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "serviceAccountName": "default",
            "containers": [{
                "name": name,
                "image": ctx.images().agnhost(),
                "command": ["/agnhost"],
                "args": ["test-service-account-issuer-discovery",
                    "--token-path", "/var/run/secrets/tokens/sa-token",
                    "--audience", "oidc-discovery-test"],
                "volumeMounts": [{"mountPath": "/var/run/secrets/tokens", "name": "sa-token", "readOnly": true}],
            }],
            "volumes": [{"name": "sa-token", "projected": {"sources": [{"serviceAccountToken": {
                "path": "sa-token", "expirationSeconds": 600, "audience": "oidc-discovery-test"}}]}}],
        }
    }))?;
    ctx.create_pod(&pod).await?;
    let outcome = ctx.wait_succeeded(name).await;
    if let Err(e) = outcome {
        // The validator's log says which step failed.
        let log = ctx.logs(name, name).await.unwrap_or_default();
        return Err(CaseError::Failed(format!(
            "{e}; the validator's log:\n{log}"
        )));
    }
    Ok(())
}
