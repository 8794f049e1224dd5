//! The CertificateSigningRequest API (test/e2e/auth/certificates.go): discovery, the resource's
//! verbs, and the /approval and /status subresources.

use std::time::Duration;

use base64::Engine;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIGroup;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use rcgen::{CertificateParams, DnType, KeyPair};
use serde_json::{json, Value};

use crate::ctx::{from_json, Ctx};
use crate::error::{CaseError, CaseResult};
use crate::{must, must_eq};

const GROUP: &str = "certificates.k8s.io";
const VERSION: &str = "v1";
const PLURAL: &str = "certificatesigningrequests";
/// wait.ForeverTestTimeout.
const WATCH_WAIT: Duration = Duration::from_secs(30);

fn cert_error(e: rcgen::Error) -> CaseError {
    CaseError::Failed(format!("making the request's key and certificate: {e}"))
}

/// A PKCS#10 request for e2e.example.com, and a self-signed certificate for it (PEM both).
fn request_and_certificate() -> CaseResult<(String, String)> {
    let key = KeyPair::generate().map_err(cert_error)?;
    let mut params =
        CertificateParams::new(vec!["e2e.example.com".to_string()]).map_err(cert_error)?;
    params
        .distinguished_name
        .push(DnType::CommonName, "e2e.example.com");
    let request = params
        .serialize_request(&key)
        .and_then(|r| r.pem())
        .map_err(cert_error)?;
    let self_key = KeyPair::generate().map_err(cert_error)?;
    let certificate = params.self_signed(&self_key).map_err(cert_error)?.pem();
    Ok((request, certificate))
}

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn annotation<'a>(csr: &'a CertificateSigningRequest, key: &str) -> Option<&'a str> {
    csr.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

fn conditions(csr: &CertificateSigningRequest) -> Vec<String> {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(|cs| cs.iter().map(|c| c.type_.clone()).collect())
        .unwrap_or_default()
}

/// A subresource read as the dynamic client reads it: its kind and uid.
async fn read_subresource(ctx: &Ctx, name: &str, sub: &str) -> CaseResult<Value> {
    let req = http::Request::get(format!("/apis/{GROUP}/{VERSION}/{PLURAL}/{name}/{sub}"))
        .body(Vec::new())
        .map_err(|e| CaseError::Failed(format!("building the /{sub} request: {e}")))?;
    Ok(ctx.client.request::<Value>(req).await?)
}

/// CertificateSigningRequest API: certificates.k8s.io/v1 MUST be in /apis and in
/// /apis/certificates.k8s.io; certificatesigningrequests and its /approval and /status MUST be in
/// the group version's resources. The resource MUST support create, get, list (by
/// spec.signerName), watch, patch, update, delete and deletecollection; /approval and /status MUST
/// support get, update and patch.
pub async fn csr_api(ctx: &Ctx) -> CaseResult {
    let groups = ctx.client.list_api_groups().await?;
    must!(
        groups
            .groups
            .iter()
            .any(|g| g.name == GROUP && g.versions.iter().any(|v| v.version == VERSION)),
        "/apis lacks {GROUP}/{VERSION}"
    );
    let req = http::Request::get(format!("/apis/{GROUP}"))
        .body(Vec::new())
        .map_err(|e| CaseError::Failed(format!("building the request: {e}")))?;
    let group: APIGroup = ctx.client.request(req).await?;
    must!(
        group.versions.iter().any(|v| v.version == VERSION),
        "/apis/{GROUP} lacks {VERSION}: {:?}",
        group.versions
    );
    let resources = ctx
        .client
        .list_api_group_resources(&format!("{GROUP}/{VERSION}"))
        .await?;
    for want in [
        PLURAL,
        "certificatesigningrequests/approval",
        "certificatesigningrequests/status",
    ] {
        must!(
            resources.resources.iter().any(|r| r.name == want),
            "/apis/{GROUP}/{VERSION} lacks {want}"
        );
    }

    let (request, certificate) = request_and_certificate()?;
    let signer = format!("example.com/e2e-{}", ctx.ns);
    let template: CertificateSigningRequest = from_json(json!({
        "metadata": {"generateName": "e2e-example-csr-"},
        "spec": {
            "request": b64(&request),
            "signerName": signer,
            "expirationSeconds": 3600,
            "usages": ["digital signature", "key encipherment", "server auth"],
        }
    }))?;
    let csrs = ctx.all::<CertificateSigningRequest>();
    let by_signer = ListParams::default().fields(&format!("spec.signerName={signer}"));
    let result = operations(ctx, &csrs, &template, &by_signer, &certificate).await;
    // The requests are cluster-scoped: none is left behind, whatever the outcome.
    let _ = csrs
        .delete_collection(&DeleteParams::default(), &by_signer)
        .await;
    result
}

async fn operations(
    ctx: &Ctx,
    csrs: &Api<CertificateSigningRequest>,
    template: &CertificateSigningRequest,
    by_signer: &ListParams,
    certificate: &str,
) -> CaseResult {
    let pp = PostParams::default();
    csrs.create(&pp, template).await?;
    csrs.create(&pp, template).await?;
    let created = csrs.create(&pp, template).await?;
    let name = created.metadata.name.clone().unwrap_or_default();

    let got = csrs.get(&name).await?;
    must_eq!(got.metadata.uid, created.metadata.uid, "the read CSR's uid");
    must_eq!(
        got.spec.expiration_seconds,
        Some(3600),
        "the read CSR's spec.expirationSeconds"
    );
    let listed = csrs.list(by_signer).await?;
    must_eq!(listed.items.len(), 3, "CSRs listed by spec.signerName");

    let rv = listed.metadata.resource_version.clone().unwrap_or_default();
    let wp = WatchParams::default().fields(&format!("metadata.name={name}"));
    let mut watch = csrs.watch(&wp, &rv).await?.boxed();

    let patched = csrs
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"patched": "true"}}})),
        )
        .await?;
    must_eq!(
        annotation(&patched, "patched"),
        Some("true"),
        "the patched annotation"
    );
    let mut to_update = patched.clone();
    to_update
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert("updated".into(), "true".into());
    let updated = csrs.replace(&name, &pp, &to_update).await?;
    must_eq!(
        annotation(&updated, "updated"),
        Some("true"),
        "the updated annotation"
    );
    tokio::time::timeout(WATCH_WAIT, async {
        while let Some(ev) = watch.try_next().await? {
            match ev {
                WatchEvent::Modified(csr) if annotation(&csr, "patched") == Some("true") => {
                    return Ok(());
                }
                WatchEvent::Modified(_) | WatchEvent::Bookmark(_) => {}
                other => {
                    return Err(CaseError::Failed(format!(
                        "a watch event other than MODIFIED: {other:?}"
                    )))
                }
            }
        }
        Err(CaseError::Failed("the watch closed".into()))
    })
    .await
    .map_err(|_| CaseError::Failed("timed out waiting for the watch event".into()))??;

    approval(ctx, csrs, &name, created.metadata.uid.as_deref()).await?;
    status(
        ctx,
        csrs,
        &name,
        created.metadata.uid.as_deref(),
        certificate,
    )
    .await?;

    csrs.delete(&name, &DeleteParams::default()).await?;
    match csrs.get(&name).await {
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        other => {
            return Err(CaseError::Failed(format!(
                "expected 404 reading the deleted CSR, got {other:?}"
            )))
        }
    }
    must_eq!(
        csrs.list(by_signer).await?.items.len(),
        2,
        "CSRs listed after the delete"
    );
    csrs.delete_collection(&DeleteParams::default(), by_signer)
        .await?;
    must_eq!(
        csrs.list(by_signer).await?.items.len(),
        0,
        "CSRs listed after the deletecollection"
    );
    Ok(())
}

fn kind_and_uid(v: &Value, sub: &str, uid: Option<&str>) -> CaseResult {
    must_eq!(
        (v["apiVersion"].as_str(), v["kind"].as_str()),
        (
            Some("certificates.k8s.io/v1"),
            Some("CertificateSigningRequest")
        ),
        "the kind read through /{sub}"
    );
    must_eq!(
        v["metadata"]["uid"].as_str(),
        uid,
        "the uid read through /{sub}"
    );
    Ok(())
}

async fn approval(
    ctx: &Ctx,
    csrs: &Api<CertificateSigningRequest>,
    name: &str,
    uid: Option<&str>,
) -> CaseResult {
    kind_and_uid(
        &read_subresource(ctx, name, "approval").await?,
        "approval",
        uid,
    )?;
    let patch = json!({
        "metadata": {"annotations": {"patchedapproval": "true"}},
        "status": {"conditions": [{"type": "ApprovalPatch", "status": "True", "reason": "e2e"}]},
    });
    let patched = csrs
        .patch_subresource(
            "approval",
            name,
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await?;
    must_eq!(
        conditions(&patched),
        vec!["ApprovalPatch".to_string()],
        "the conditions after patching /approval"
    );
    must_eq!(
        annotation(&patched, "patchedapproval"),
        Some("true"),
        "the annotation patched through /approval"
    );
    let mut to_update = patched.clone();
    to_update
        .status
        .get_or_insert_with(Default::default)
        .conditions
        .get_or_insert_with(Vec::new)
        .push(from_json(json!({
            "type": "Approved", "status": "True",
            "reason": "E2E", "message": "Set from an e2e test",
        }))?);
    let updated = csrs
        .replace_subresource("approval", name, &PostParams::default(), &to_update)
        .await?;
    must_eq!(
        conditions(&updated),
        vec!["ApprovalPatch".to_string(), "Approved".to_string()],
        "the conditions after updating /approval"
    );
    Ok(())
}

async fn status(
    ctx: &Ctx,
    csrs: &Api<CertificateSigningRequest>,
    name: &str,
    uid: Option<&str>,
    certificate: &str,
) -> CaseResult {
    kind_and_uid(&read_subresource(ctx, name, "status").await?, "status", uid)?;
    let patch = json!({
        "metadata": {"annotations": {"patchedstatus": "true"}},
        "status": {"certificate": b64(certificate)},
    });
    let patched = csrs
        .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    let got = patched
        .status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .map(|c| c.0.clone())
        .unwrap_or_default();
    must!(
        got == certificate.as_bytes(),
        "the certificate patched through /status was not kept"
    );
    must_eq!(
        annotation(&patched, "patchedstatus"),
        Some("true"),
        "the annotation patched through /status"
    );
    let mut to_update = patched.clone();
    let conds = to_update
        .status
        .get_or_insert_with(Default::default)
        .conditions
        .get_or_insert_with(Vec::new);
    conds.push(from_json(json!({
        "type": "StatusUpdate", "status": "True",
        "reason": "E2E", "message": "Set from an e2e test",
    }))?);
    let want = conds.len();
    let updated = csrs
        .replace_status(name, &PostParams::default(), &to_update)
        .await?;
    let now = conditions(&updated);
    must_eq!(
        now.len(),
        want,
        "the number of conditions after updating /status ({now:?})"
    );
    must_eq!(
        now.last().map(String::as_str),
        Some("StatusUpdate"),
        "the last condition after updating /status"
    );
    Ok(())
}
