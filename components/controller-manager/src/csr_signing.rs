//! csrsigning: signs approved CSRs for kubernetes.io/kube-apiserver-client-kubelet,
//! kubernetes.io/kubelet-serving and kubernetes.io/kube-apiserver-client with the cluster CA
//! (--cluster-signing-cert-file / --cluster-signing-key-file), writing status.certificate through
//! /status. A request that breaks its signer's rules gets a Failed condition (reason
//! SignerValidationFailure) instead, as upstream's signer does. The certificate carries the
//! request's subject, SANs and public key, spec.usages as key usages, and lives
//! --cluster-signing-duration (or spec.expirationSeconds, at least 10 minutes, if shorter),
//! backdated 5 minutes for clock skew and never past the CA's own expiry.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::ByteString;
use kube::api::{Api, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use rcgen::{
    CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    SerialNumber,
};
use time::OffsetDateTime;

use crate::context::Context;
use crate::csr::{self, Request};

/// Upstream's floor for spec.expirationSeconds.
const MIN_EXPIRATION: Duration = Duration::from_secs(600);
/// Backdating absorbs clock skew between the signer and whoever checks the certificate.
const BACKDATE: time::Duration = time::Duration::minutes(5);

#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("loading the signing CA: {0}")]
    Ca(String),
    #[error("signing: {0}")]
    Sign(#[source] rcgen::Error),
    #[error("writing the status of {csr}: {source}")]
    Status { csr: String, source: kube::Error },
}

/// The cluster CA, ready to sign.
pub struct Signer {
    issuer: Issuer<'static, KeyPair>,
    ca_not_after: OffsetDateTime,
    max: Duration,
}

impl Signer {
    pub fn load(cert_pem: &str, key_pem: &str, max: Duration) -> Result<Signer, SignError> {
        let key = KeyPair::from_pem(key_pem).map_err(|e| SignError::Ca(e.to_string()))?;
        let issuer =
            Issuer::from_ca_cert_pem(cert_pem, key).map_err(|e| SignError::Ca(e.to_string()))?;
        let (_, pem) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes())
            .map_err(|e| SignError::Ca(e.to_string()))?;
        let cert = pem.parse_x509().map_err(|e| SignError::Ca(e.to_string()))?;
        Ok(Signer {
            issuer,
            ca_not_after: cert.validity().not_after.to_datetime(),
            max,
        })
    }

    pub fn from_files(cert: &Path, key: &Path, max: Duration) -> Result<Signer, SignError> {
        let read = |p: &Path| {
            std::fs::read_to_string(p).map_err(|source| SignError::Read {
                path: p.display().to_string(),
                source,
            })
        };
        Signer::load(&read(cert)?, &read(key)?, max)
    }

    /// A PEM certificate for the request's subject, SANs and key.
    pub fn sign(
        &self,
        req: &Request,
        usages: &[String],
        expiration_seconds: Option<i32>,
        now: OffsetDateTime,
    ) -> Result<String, SignError> {
        let mut params = CertificateParams::default();
        params.distinguished_name = req.params.params.distinguished_name.clone();
        params.subject_alt_names = req.params.params.subject_alt_names.clone();
        (params.key_usages, params.extended_key_usages) = key_usages(usages);
        params.is_ca = IsCa::ExplicitNoCa;
        params.use_authority_key_identifier_extension = true;
        let mut serial: [u8; 16] = rand::random();
        serial[0] &= 0x7f; // a positive integer, as RFC 5280 requires
        params.serial_number = Some(SerialNumber::from_slice(&serial));
        (params.not_before, params.not_after) =
            validity(now, self.max, expiration_seconds, self.ca_not_after);
        let mut request = req.params.clone();
        request.params = params;
        let cert = request.signed_by(&self.issuer).map_err(SignError::Sign)?;
        Ok(cert.pem())
    }
}

/// (notBefore, notAfter): the shorter of `max` and the requested lifetime (floored at 10 minutes),
/// backdated, capped at the CA's expiry.
pub fn validity(
    now: OffsetDateTime,
    max: Duration,
    expiration_seconds: Option<i32>,
    ca_not_after: OffsetDateTime,
) -> (OffsetDateTime, OffsetDateTime) {
    let mut life = max;
    if let Some(s) = expiration_seconds {
        let asked = Duration::from_secs(s.max(0) as u64).max(MIN_EXPIRATION);
        life = life.min(asked);
    }
    let not_after = now + time::Duration::try_from(life).unwrap_or(time::Duration::MAX);
    (now - BACKDATE, not_after.min(ca_not_after))
}

/// spec.usages as key usages and extended key usages (unknown strings are skipped; the signer's
/// rules have already rejected them for the signers kiln serves).
pub fn key_usages(usages: &[String]) -> (Vec<KeyUsagePurpose>, Vec<ExtendedKeyUsagePurpose>) {
    let mut ku = Vec::new();
    let mut eku = Vec::new();
    for u in usages {
        match u.as_str() {
            "digital signature" => ku.push(KeyUsagePurpose::DigitalSignature),
            "content commitment" => ku.push(KeyUsagePurpose::ContentCommitment),
            "key encipherment" => ku.push(KeyUsagePurpose::KeyEncipherment),
            "data encipherment" => ku.push(KeyUsagePurpose::DataEncipherment),
            "key agreement" => ku.push(KeyUsagePurpose::KeyAgreement),
            "cert sign" => ku.push(KeyUsagePurpose::KeyCertSign),
            "crl sign" => ku.push(KeyUsagePurpose::CrlSign),
            "encipher only" => ku.push(KeyUsagePurpose::EncipherOnly),
            "decipher only" => ku.push(KeyUsagePurpose::DecipherOnly),
            "server auth" => eku.push(ExtendedKeyUsagePurpose::ServerAuth),
            "client auth" => eku.push(ExtendedKeyUsagePurpose::ClientAuth),
            "code signing" => eku.push(ExtendedKeyUsagePurpose::CodeSigning),
            "email protection" => eku.push(ExtendedKeyUsagePurpose::EmailProtection),
            "timestamping" => eku.push(ExtendedKeyUsagePurpose::TimeStamping),
            "ocsp signing" => eku.push(ExtendedKeyUsagePurpose::OcspSigning),
            "any" => eku.push(ExtendedKeyUsagePurpose::Any),
            _ => {}
        }
    }
    (ku, eku)
}

/// What to do with a CSR.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// Not approved yet, failed, issued, or another signer's.
    Skip,
    /// Ours and invalid: mark Failed with this message.
    Fail(String),
    Sign,
}

/// Parses and checks a CSR against its signer's rules; the parsed request comes back for signing.
pub fn decide(csr: &CertificateSigningRequest) -> (Decision, Option<Request>) {
    if !csr::has_condition(csr, "Approved")
        || csr::has_condition(csr, "Failed")
        || csr::has_certificate(csr)
    {
        return (Decision::Skip, None);
    }
    let (pem, signer, usages) = csr::parts(csr);
    if ![
        csr::KUBELET_CLIENT_SIGNER,
        csr::KUBELET_SERVING_SIGNER,
        csr::API_SERVER_CLIENT_SIGNER,
    ]
    .contains(&signer)
    {
        return (Decision::Skip, None);
    }
    let req = match csr::parse(pem) {
        Ok(r) => r,
        Err(e) => return (Decision::Fail(e.to_string()), None),
    };
    match csr::valid_for_signer(signer, &req, usages) {
        Ok(true) => (Decision::Sign, Some(req)),
        Ok(false) => (Decision::Skip, None),
        Err(why) => (Decision::Fail(why), None),
    }
}

fn failed(csr: &CertificateSigningRequest, message: &str) -> CertificateSigningRequest {
    let mut out = csr.clone();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    out.status
        .get_or_insert_with(Default::default)
        .conditions
        .get_or_insert_with(Vec::new)
        .push(CertificateSigningRequestCondition {
            type_: "Failed".into(),
            status: "True".into(),
            reason: Some("SignerValidationFailure".into()),
            message: Some(message.into()),
            last_update_time: Some(now.clone()),
            last_transition_time: Some(now),
        });
    out
}

struct State {
    api: Api<CertificateSigningRequest>,
    signer: Signer,
}

pub async fn run(ctx: Context) {
    let (Some(cert), Some(key)) = (
        ctx.options.cluster_signing_cert_file.as_deref(),
        ctx.options.cluster_signing_key_file.as_deref(),
    ) else {
        tracing::info!(
            "csrsigning: no --cluster-signing-cert-file/--cluster-signing-key-file; not signing"
        );
        return;
    };
    let signer = match Signer::from_files(cert, key, ctx.options.cluster_signing_duration) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "csrsigning: cannot load the signing CA; not signing");
            return;
        }
    };
    let api: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
    let state = Arc::new(State {
        api: api.clone(),
        signer,
    });
    Controller::new(api, watcher::Config::default())
        .run(reconcile, error_policy, state)
        .for_each(|_| async {})
        .await;
}

async fn reconcile(
    csr: Arc<CertificateSigningRequest>,
    st: Arc<State>,
) -> Result<Action, SignError> {
    let name = csr.metadata.name.clone().unwrap_or_default();
    let status_err = |source| SignError::Status {
        csr: name.clone(),
        source,
    };
    match decide(&csr) {
        (Decision::Skip, _) => {}
        (Decision::Fail(why), _) => {
            st.api
                .replace_status(&name, &PostParams::default(), &failed(&csr, &why))
                .await
                .map_err(status_err)?;
            tracing::info!(csr = %name, reason = %why, "certificate signing request failed validation");
        }
        (Decision::Sign, Some(req)) => {
            let (_, _, usages) = csr::parts(&csr);
            let pem = st.signer.sign(
                &req,
                usages,
                csr.spec.expiration_seconds,
                OffsetDateTime::now_utc(),
            )?;
            let mut out = (*csr).clone();
            out.status.get_or_insert_with(Default::default).certificate =
                Some(ByteString(pem.into_bytes()));
            st.api
                .replace_status(&name, &PostParams::default(), &out)
                .await
                .map_err(status_err)?;
            tracing::info!(csr = %name, cn = %req.common_name, "signed certificate");
        }
        (Decision::Sign, None) => {}
    }
    Ok(Action::await_change())
}

fn error_policy(_: Arc<CertificateSigningRequest>, err: &SignError, _: Arc<State>) -> Action {
    tracing::warn!(error = %err, "csrsigning");
    Action::requeue(Duration::from_secs(2))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csr::tests::request;
    use rcgen::{BasicConstraints, DnType};
    use x509_parser::prelude::FromDer;

    fn ca() -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "kubernetes");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn approved_csr(pem: Vec<u8>, signer: &str, usages: &[&str]) -> CertificateSigningRequest {
        let mut c = CertificateSigningRequest::default();
        c.spec.request = ByteString(pem);
        c.spec.signer_name = signer.into();
        c.spec.usages = Some(usages.iter().map(|s| s.to_string()).collect());
        c.status = Some(Default::default());
        c.status.as_mut().unwrap().conditions = Some(vec![CertificateSigningRequestCondition {
            type_: "Approved".into(),
            status: "True".into(),
            ..Default::default()
        }]);
        c
    }

    #[test]
    fn validity_window() {
        let now = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let year = Duration::from_secs(365 * 24 * 3600);
        let far = now + time::Duration::days(3650);
        let (nb, na) = validity(now, year, None, far);
        assert_eq!(nb, now - time::Duration::minutes(5));
        assert_eq!(na, now + time::Duration::days(365));
        let (_, na) = validity(now, year, Some(3600), far);
        assert_eq!(na, now + time::Duration::hours(1));
        let (_, na) = validity(now, year, Some(60), far);
        assert_eq!(
            na,
            now + time::Duration::minutes(10),
            "floored at 10 minutes"
        );
        let soon = now + time::Duration::days(30);
        let (_, na) = validity(now, year, None, soon);
        assert_eq!(na, soon, "never past the CA");
    }

    #[test]
    fn decisions() {
        let node = request("system:node:foo", &["system:nodes"], &[]);
        let c = approved_csr(
            node.clone(),
            csr::KUBELET_CLIENT_SIGNER,
            &["digital signature", "client auth"],
        );
        assert_eq!(decide(&c).0, Decision::Sign);
        let mut pending = c.clone();
        pending.status = None;
        assert_eq!(decide(&pending).0, Decision::Skip);
        let other = approved_csr(node.clone(), "example.com/signer", &["client auth"]);
        assert_eq!(decide(&other).0, Decision::Skip);
        let serving = approved_csr(
            node,
            csr::KUBELET_SERVING_SIGNER,
            &["digital signature", "server auth"],
        );
        assert!(matches!(decide(&serving).0, Decision::Fail(m) if m.contains("subjectAltName")));
        let garbage = approved_csr(
            b"nope".to_vec(),
            csr::KUBELET_CLIENT_SIGNER,
            &["client auth"],
        );
        assert!(matches!(decide(&garbage).0, Decision::Fail(_)));
        let done = failed(&garbage, "x");
        assert_eq!(decide(&done).0, Decision::Skip);
    }

    #[test]
    fn signs_with_the_ca() {
        let (ca_cert, ca_key) = ca();
        let signer = Signer::load(&ca_cert, &ca_key, Duration::from_secs(3600)).unwrap();
        let pem = request(
            "system:node:foo",
            &["system:nodes"],
            &["foo.local", "10.0.0.7"],
        );
        let req = csr::parse(&pem).unwrap();
        let usages = vec!["digital signature".to_string(), "server auth".to_string()];
        let out = signer
            .sign(&req, &usages, None, OffsetDateTime::now_utc())
            .unwrap();
        let (_, block) = x509_parser::pem::parse_x509_pem(out.as_bytes()).unwrap();
        let (_, cert) =
            x509_parser::certificate::X509Certificate::from_der(&block.contents).unwrap();
        let cn = cert
            .subject()
            .iter_common_name()
            .next()
            .unwrap()
            .as_str()
            .unwrap();
        assert_eq!(cn, "system:node:foo");
        let o = cert
            .subject()
            .iter_organization()
            .next()
            .unwrap()
            .as_str()
            .unwrap();
        assert_eq!(o, "system:nodes");
        assert_eq!(
            cert.issuer()
                .iter_common_name()
                .next()
                .unwrap()
                .as_str()
                .unwrap(),
            "kubernetes"
        );
        let eku = cert.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.server_auth && !eku.client_auth);
        let san = cert.subject_alternative_name().unwrap().unwrap().value;
        assert_eq!(san.general_names.len(), 2);
        assert!(!cert.is_ca());
        // The certificate's key is the request's key.
        let (_, req_block) = x509_parser::pem::parse_x509_pem(&pem).unwrap();
        let (_, parsed) = x509_parser::certification_request::X509CertificationRequest::from_der(
            &req_block.contents,
        )
        .unwrap();
        assert_eq!(
            cert.public_key().raw,
            parsed.certification_request_info.subject_pki.raw
        );
    }
}
