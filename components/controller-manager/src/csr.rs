//! A CertificateSigningRequest's PKCS#10 request as the csrapproving and csrsigning controllers
//! see it: parsed (signature checked), its subject and SANs read out, and the signers' rules
//! (upstream's kubelet client / kubelet serving / kube-apiserver client checks) as pure functions.

use std::collections::BTreeSet;
use std::net::IpAddr;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::FromDer;

pub const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const KUBELET_SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
pub const API_SERVER_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client";

const DIGITAL_SIGNATURE: &str = "digital signature";
const KEY_ENCIPHERMENT: &str = "key encipherment";
const CLIENT_AUTH: &str = "client auth";
const SERVER_AUTH: &str = "server auth";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CsrError {
    #[error("PEM block type must be CERTIFICATE REQUEST")]
    NotPem,
    #[error("unable to parse the certificate request")]
    Unparseable,
    #[error("the certificate request's signature or extensions are invalid: {0}")]
    Rejected(String),
}

/// What a request asks for.
pub struct Request {
    pub common_name: String,
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
    pub emails: Vec<String>,
    pub uris: Vec<String>,
    /// A subject attribute type other than O appears more than once (or O with other repeats):
    /// rcgen keeps one value per type, so such a subject cannot be signed faithfully.
    pub repeated_attributes: bool,
    /// The request as rcgen reads it (subject, SANs, public key), for signing.
    pub params: rcgen::CertificateSigningRequestParams,
}

/// Parses a PEM request and checks its self-signature.
pub fn parse(pem: &[u8]) -> Result<Request, CsrError> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem).map_err(|_| CsrError::NotPem)?;
    if block.label != "CERTIFICATE REQUEST" {
        return Err(CsrError::NotPem);
    }
    let (_, req) =
        X509CertificationRequest::from_der(&block.contents).map_err(|_| CsrError::Unparseable)?;
    let subject = &req.certification_request_info.subject;
    let text = |a: &x509_parser::x509::AttributeTypeAndValue| a.as_str().unwrap_or("").to_string();
    let common_name = subject
        .iter_common_name()
        .next()
        .map(text)
        .unwrap_or_default();
    let organizations: Vec<String> = subject.iter_organization().map(text).collect();
    let mut seen = Vec::new();
    let mut repeated_attributes = false;
    for attr in subject.iter_attributes() {
        let oid = attr.attr_type().to_id_string();
        if seen.contains(&oid) {
            repeated_attributes = true;
        }
        seen.push(oid);
    }
    let (mut dns_names, mut ip_addresses, mut emails, mut uris) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for ext in req.requested_extensions().into_iter().flatten() {
        if let ParsedExtension::SubjectAlternativeName(san) = ext {
            for name in &san.general_names {
                match name {
                    GeneralName::DNSName(d) => dns_names.push(d.to_string()),
                    GeneralName::RFC822Name(e) => emails.push(e.to_string()),
                    GeneralName::URI(u) => uris.push(u.to_string()),
                    GeneralName::IPAddress(bytes) => {
                        if let Some(ip) = ip_from_bytes(bytes) {
                            ip_addresses.push(ip);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    let text_pem = std::str::from_utf8(pem).map_err(|_| CsrError::NotPem)?;
    let params = rcgen::CertificateSigningRequestParams::from_pem(text_pem)
        .map_err(|e| CsrError::Rejected(e.to_string()))?;
    Ok(Request {
        common_name,
        organizations,
        dns_names,
        ip_addresses,
        emails,
        uris,
        repeated_attributes,
        params,
    })
}

fn ip_from_bytes(bytes: &[u8]) -> Option<IpAddr> {
    match bytes.len() {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(bytes).ok()?)),
        16 => Some(IpAddr::from(<[u8; 16]>::try_from(bytes).ok()?)),
        _ => None,
    }
}

fn usage_set(usages: &[String]) -> BTreeSet<&str> {
    usages.iter().map(String::as_str).collect()
}

fn node_subject(req: &Request) -> Result<(), String> {
    if req.organizations != ["system:nodes"] {
        return Err("subject organization is not system:nodes".into());
    }
    if !req.common_name.starts_with("system:node:") {
        return Err("subject common name does not begin with system:node:".into());
    }
    Ok(())
}

/// Upstream's ValidateKubeletClientCSR: a node's client certificate, nothing more.
pub fn validate_kubelet_client(req: &Request, usages: &[String]) -> Result<(), String> {
    node_subject(req)?;
    if !req.dns_names.is_empty() {
        return Err("DNS subjectAltNames are not allowed".into());
    }
    if !req.emails.is_empty() {
        return Err("Email subjectAltNames are not allowed".into());
    }
    if !req.ip_addresses.is_empty() {
        return Err("IP subjectAltNames are not allowed".into());
    }
    if !req.uris.is_empty() {
        return Err("URI subjectAltNames are not allowed".into());
    }
    let set = usage_set(usages);
    let with_rsa = BTreeSet::from([DIGITAL_SIGNATURE, KEY_ENCIPHERMENT, CLIENT_AUTH]);
    let without = BTreeSet::from([DIGITAL_SIGNATURE, CLIENT_AUTH]);
    if set != with_rsa && set != without {
        return Err(format!(
            "usages did not match [{DIGITAL_SIGNATURE} {KEY_ENCIPHERMENT} {CLIENT_AUTH}] or [{DIGITAL_SIGNATURE} {CLIENT_AUTH}]"
        ));
    }
    Ok(())
}

/// Upstream's ValidateKubeletServingCSR: a node's serving certificate for its names / addresses.
pub fn validate_kubelet_serving(req: &Request, usages: &[String]) -> Result<(), String> {
    node_subject(req)?;
    if req.dns_names.is_empty() && req.ip_addresses.is_empty() {
        return Err("DNS or IP subjectAltName is required".into());
    }
    if !req.emails.is_empty() {
        return Err("Email subjectAltNames are not allowed".into());
    }
    if !req.uris.is_empty() {
        return Err("URI subjectAltNames are not allowed".into());
    }
    let set = usage_set(usages);
    let with_rsa = BTreeSet::from([DIGITAL_SIGNATURE, KEY_ENCIPHERMENT, SERVER_AUTH]);
    let without = BTreeSet::from([DIGITAL_SIGNATURE, SERVER_AUTH]);
    if set != with_rsa && set != without {
        return Err(format!(
            "usages did not match [{DIGITAL_SIGNATURE} {KEY_ENCIPHERMENT} {SERVER_AUTH}] or [{DIGITAL_SIGNATURE} {SERVER_AUTH}]"
        ));
    }
    Ok(())
}

/// kube-apiserver-client: any subject, client auth required, nothing beyond signing/encipherment.
pub fn validate_api_server_client(usages: &[String]) -> Result<(), String> {
    for u in usages {
        if ![DIGITAL_SIGNATURE, KEY_ENCIPHERMENT, CLIENT_AUTH].contains(&u.as_str()) {
            return Err(format!("invalid usage for client certificate: {u}"));
        }
    }
    if !usages.iter().any(|u| u == CLIENT_AUTH) {
        return Err(format!(
            "missing required usage for client certificate: {CLIENT_AUTH}"
        ));
    }
    Ok(())
}

/// For the signers kiln signs: Ok(true) when the request is valid for its signer, Ok(false) when
/// the signer is someone else's, Err(why) when it is ours but invalid.
pub fn valid_for_signer(signer: &str, req: &Request, usages: &[String]) -> Result<bool, String> {
    match signer {
        KUBELET_CLIENT_SIGNER => validate_kubelet_client(req, usages)?,
        KUBELET_SERVING_SIGNER => validate_kubelet_serving(req, usages)?,
        API_SERVER_CLIENT_SIGNER => validate_api_server_client(usages)?,
        _ => return Ok(false),
    }
    if req.repeated_attributes {
        return Err("subjects with a repeated attribute type cannot be signed by kiln".into());
    }
    Ok(true)
}

/// The request PEM, the signer and the usages of a CSR object.
pub fn parts(csr: &CertificateSigningRequest) -> (&[u8], &str, &[String]) {
    (
        &csr.spec.request.0,
        &csr.spec.signer_name,
        csr.spec.usages.as_deref().unwrap_or(&[]),
    )
}

/// Whether the CSR carries a condition of this type with status True.
pub fn has_condition(csr: &CertificateSigningRequest, type_: &str) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|l| l.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

pub fn has_certificate(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .is_some_and(|c| !c.0.is_empty())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rcgen::{CertificateParams, DnType, KeyPair, SanType};

    /// A PEM request with the given CN, Os and SANs.
    pub(crate) fn request(cn: &str, orgs: &[&str], sans: &[&str]) -> Vec<u8> {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        for o in orgs {
            params.distinguished_name.push(DnType::OrganizationName, *o);
        }
        for s in sans {
            params.subject_alt_names.push(match s.parse::<IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName((*s).try_into().unwrap()),
            });
        }
        params
            .serialize_request(&key)
            .unwrap()
            .pem()
            .unwrap()
            .into_bytes()
    }

    fn usages(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_subject_and_sans() {
        let r = parse(&request(
            "system:node:a",
            &["system:nodes"],
            &["a.local", "10.0.0.5"],
        ))
        .unwrap();
        assert_eq!(r.common_name, "system:node:a");
        assert_eq!(r.organizations, ["system:nodes"]);
        assert_eq!(r.dns_names, ["a.local"]);
        assert_eq!(r.ip_addresses, ["10.0.0.5".parse::<IpAddr>().unwrap()]);
        assert!(!r.repeated_attributes);
    }

    #[test]
    fn rejects_garbage_and_tampered_requests() {
        assert_eq!(parse(b"not pem").err(), Some(CsrError::NotPem));
        let cert_pem = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert_eq!(parse(cert_pem).err(), Some(CsrError::NotPem));
        // Flip a byte inside the signed part: the self-signature no longer verifies.
        let good = request("system:node:a", &["system:nodes"], &[]);
        let (_, block) = x509_parser::pem::parse_x509_pem(&good).unwrap();
        let mut der = block.contents.clone();
        let i = der
            .windows(b"system:node:a".len())
            .position(|w| w == b"system:node:a")
            .unwrap();
        der[i] = b'S';
        use base64::Engine;
        let body = base64::engine::general_purpose::STANDARD.encode(&der);
        let tampered = format!(
            "-----BEGIN CERTIFICATE REQUEST-----\n{body}\n-----END CERTIFICATE REQUEST-----\n"
        );
        assert!(matches!(
            parse(tampered.as_bytes()),
            Err(CsrError::Rejected(_))
        ));
    }

    #[test]
    fn kubelet_client_rules() {
        let ok = parse(&request("system:node:a", &["system:nodes"], &[])).unwrap();
        let u = usages(&["digital signature", "client auth"]);
        assert_eq!(valid_for_signer(KUBELET_CLIENT_SIGNER, &ok, &u), Ok(true));
        let u_rsa = usages(&["digital signature", "key encipherment", "client auth"]);
        assert_eq!(
            valid_for_signer(KUBELET_CLIENT_SIGNER, &ok, &u_rsa),
            Ok(true)
        );
        assert!(validate_kubelet_client(&ok, &usages(&["client auth"])).is_err());
        assert!(
            validate_kubelet_client(&ok, &usages(&["digital signature", "server auth"])).is_err()
        );
        let wrong_cn = parse(&request("admin", &["system:nodes"], &[])).unwrap();
        assert!(validate_kubelet_client(&wrong_cn, &u).is_err());
        let wrong_o = parse(&request("system:node:a", &["system:masters"], &[])).unwrap();
        assert!(validate_kubelet_client(&wrong_o, &u).is_err());
        let with_san = parse(&request("system:node:a", &["system:nodes"], &["a"])).unwrap();
        assert!(validate_kubelet_client(&with_san, &u).is_err());
        assert_eq!(
            valid_for_signer("example.com/other", &wrong_cn, &u),
            Ok(false)
        );
    }

    #[test]
    fn kubelet_serving_rules() {
        let u = usages(&["digital signature", "server auth"]);
        let ok = parse(&request(
            "system:node:a",
            &["system:nodes"],
            &["a", "10.0.0.5"],
        ))
        .unwrap();
        assert_eq!(valid_for_signer(KUBELET_SERVING_SIGNER, &ok, &u), Ok(true));
        let no_san = parse(&request("system:node:a", &["system:nodes"], &[])).unwrap();
        assert!(validate_kubelet_serving(&no_san, &u).is_err());
        assert!(
            validate_kubelet_serving(&ok, &usages(&["digital signature", "client auth"])).is_err()
        );
    }

    #[test]
    fn api_server_client_rules() {
        let r = parse(&request("jane", &["devs"], &[])).unwrap();
        assert_eq!(
            valid_for_signer(API_SERVER_CLIENT_SIGNER, &r, &usages(&["client auth"])),
            Ok(true)
        );
        assert!(validate_api_server_client(&usages(&["digital signature"])).is_err());
        assert!(validate_api_server_client(&usages(&["client auth", "server auth"])).is_err());
    }
}
