//! csrapproving: approves the kubelet client CSRs a requester may have approved automatically, like
//! upstream's SubjectAccessReview approver. A node renewing its own certificate (CN = requester) is
//! approved when the requester may `create certificatesigningrequests/selfnodeclient`; a new node's
//! request (a bootstrap-token user asking for `system:node:<name>`) when it may `create
//! certificatesigningrequests/nodeclient` — kubeadm's bindings grant those to system:nodes and
//! system:bootstrappers. Approval is condition Approved, reason AutoApproved, written through the
//! /approval subresource. Anything else stays Pending for a human (nothing is denied here).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;

use crate::context::Context;
use crate::csr::{self, Request, KUBELET_CLIENT_SIGNER};

#[derive(Debug, thiserror::Error)]
pub enum ApproveError {
    #[error("subject access review for {csr}: {source}")]
    Review { csr: String, source: kube::Error },
    #[error("approving {csr}: {source}")]
    Approve { csr: String, source: kube::Error },
}

/// One kind of request the approver knows, and the permission the requester needs for it.
pub struct Recognizer {
    pub subresource: &'static str,
    pub message: &'static str,
    pub recognize: fn(&CertificateSigningRequest, &Request) -> bool,
}

/// Checked in this order, like upstream's.
pub static RECOGNIZERS: &[Recognizer] = &[
    Recognizer {
        subresource: "selfnodeclient",
        message: "Auto approving self kubelet client certificate after SubjectAccessReview.",
        recognize: is_self_node_client,
    },
    Recognizer {
        subresource: "nodeclient",
        message: "Auto approving kubelet client certificate after SubjectAccessReview.",
        recognize: is_node_client,
    },
];

/// A kubelet client certificate request, valid by the signer's rules.
pub fn is_node_client(csr: &CertificateSigningRequest, req: &Request) -> bool {
    let (_, signer, usages) = csr::parts(csr);
    signer == KUBELET_CLIENT_SIGNER && csr::validate_kubelet_client(req, usages).is_ok()
}

/// A node asking for a client certificate in its own name (renewal).
pub fn is_self_node_client(csr: &CertificateSigningRequest, req: &Request) -> bool {
    csr.spec.username.as_deref() == Some(req.common_name.as_str()) && is_node_client(csr, req)
}

/// Still waiting for a decision: not approved, denied or issued.
pub fn undecided(csr: &CertificateSigningRequest) -> bool {
    !csr::has_certificate(csr)
        && !csr::has_condition(csr, "Approved")
        && !csr::has_condition(csr, "Denied")
}

/// The recognizers that match, in order.
pub fn candidates(csr: &CertificateSigningRequest, req: &Request) -> Vec<&'static Recognizer> {
    RECOGNIZERS
        .iter()
        .filter(|r| (r.recognize)(csr, req))
        .collect()
}

/// The review asking whether the CSR's requester may create the given CSR subresource.
pub fn review(csr: &CertificateSigningRequest, subresource: &str) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: csr.spec.username.clone(),
            uid: csr.spec.uid.clone(),
            groups: csr.spec.groups.clone(),
            extra: csr.spec.extra.clone(),
            resource_attributes: Some(ResourceAttributes {
                group: Some("certificates.k8s.io".into()),
                resource: Some("certificatesigningrequests".into()),
                subresource: Some(subresource.into()),
                verb: Some("create".into()),
                version: Some("*".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The CSR with an Approved condition appended.
pub fn approved(csr: &CertificateSigningRequest, message: &str) -> CertificateSigningRequest {
    let mut out = csr.clone();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let status = out.status.get_or_insert_with(Default::default);
    status
        .conditions
        .get_or_insert_with(Vec::new)
        .push(CertificateSigningRequestCondition {
            type_: "Approved".into(),
            status: "True".into(),
            reason: Some("AutoApproved".into()),
            message: Some(message.into()),
            last_update_time: Some(now.clone()),
            last_transition_time: Some(now),
        });
    out
}

pub async fn run(ctx: Context) {
    let api: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
    Controller::new(api.clone(), watcher::Config::default())
        .run(reconcile, error_policy, Arc::new(ctx))
        .for_each(|_| async {})
        .await;
}

async fn reconcile(
    csr: Arc<CertificateSigningRequest>,
    ctx: Arc<Context>,
) -> Result<Action, ApproveError> {
    if !undecided(&csr) {
        return Ok(Action::await_change());
    }
    let name = csr.metadata.name.clone().unwrap_or_default();
    let (pem, _, _) = csr::parts(&csr);
    let req = match csr::parse(pem) {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(csr = %name, error = %e, "csrapproving: not a parseable request; left alone");
            return Ok(Action::await_change());
        }
    };
    let tried = candidates(&csr, &req);
    let reviews: Api<SubjectAccessReview> = Api::all(ctx.client.clone());
    for recognizer in &tried {
        let answer = reviews
            .create(
                &PostParams::default(),
                &review(&csr, recognizer.subresource),
            )
            .await
            .map_err(|source| ApproveError::Review {
                csr: name.clone(),
                source,
            })?;
        if answer.status.is_some_and(|s| s.allowed) {
            let api: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
            api.replace_subresource(
                "approval",
                &name,
                &PostParams::default(),
                &approved(&csr, recognizer.message),
            )
            .await
            .map_err(|source| ApproveError::Approve {
                csr: name.clone(),
                source,
            })?;
            tracing::info!(csr = %name, kind = recognizer.subresource, "approved certificate signing request");
            return Ok(Action::await_change());
        }
    }
    if !tried.is_empty() {
        tracing::info!(csr = %name, "recognized as a kubelet client request, but the subject access review did not allow it");
    }
    Ok(Action::await_change())
}

fn error_policy(_: Arc<CertificateSigningRequest>, err: &ApproveError, _: Arc<Context>) -> Action {
    tracing::warn!(error = %err, "csrapproving");
    Action::requeue(Duration::from_secs(2))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csr::tests::request;
    use k8s_openapi::ByteString;

    fn csr_for(pem: Vec<u8>, user: &str, signer: &str) -> CertificateSigningRequest {
        let mut c = CertificateSigningRequest::default();
        c.spec.request = ByteString(pem);
        c.spec.signer_name = signer.into();
        c.spec.usages = Some(vec!["digital signature".into(), "client auth".into()]);
        c.spec.username = Some(user.into());
        c
    }

    #[test]
    fn bootstrap_and_renewal_requests_are_recognized() {
        let pem = request("system:node:foo", &["system:nodes"], &[]);
        let req = csr::parse(&pem).unwrap();
        let bootstrap = csr_for(
            pem.clone(),
            "system:bootstrap:abcdef",
            KUBELET_CLIENT_SIGNER,
        );
        let kinds: Vec<_> = candidates(&bootstrap, &req)
            .iter()
            .map(|r| r.subresource)
            .collect();
        assert_eq!(kinds, ["nodeclient"]);
        let renewal = csr_for(pem, "system:node:foo", KUBELET_CLIENT_SIGNER);
        let kinds: Vec<_> = candidates(&renewal, &req)
            .iter()
            .map(|r| r.subresource)
            .collect();
        assert_eq!(kinds, ["selfnodeclient", "nodeclient"]);
    }

    #[test]
    fn other_requests_are_not() {
        let admin = request("admin", &["system:masters"], &[]);
        let req = csr::parse(&admin).unwrap();
        let c = csr_for(admin, "system:bootstrap:abcdef", KUBELET_CLIENT_SIGNER);
        assert!(candidates(&c, &req).is_empty());
        let node = request("system:node:foo", &["system:nodes"], &[]);
        let req = csr::parse(&node).unwrap();
        let serving = csr_for(node, "system:node:foo", crate::csr::KUBELET_SERVING_SIGNER);
        assert!(candidates(&serving, &req).is_empty());
    }

    #[test]
    fn approval_condition_and_review() {
        let pem = request("system:node:foo", &["system:nodes"], &[]);
        let c = csr_for(pem, "system:bootstrap:abcdef", KUBELET_CLIENT_SIGNER);
        assert!(undecided(&c));
        let a = approved(&c, "ok");
        assert!(!undecided(&a));
        let cond = &a.status.unwrap().conditions.unwrap()[0];
        assert_eq!(
            (cond.type_.as_str(), cond.reason.as_deref()),
            ("Approved", Some("AutoApproved"))
        );
        let r = review(&c, "nodeclient");
        let attrs = r.spec.resource_attributes.unwrap();
        assert_eq!(r.spec.user.as_deref(), Some("system:bootstrap:abcdef"));
        assert_eq!(attrs.subresource.as_deref(), Some("nodeclient"));
        assert_eq!(attrs.verb.as_deref(), Some("create"));
    }
}
